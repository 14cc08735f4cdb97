"""Built-in rank programs (ddp_mlp, dist_smoke) with fault injection, run as scripts by the runners."""
