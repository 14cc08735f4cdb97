"""The judge: pure decision parts that turn what the ranks said into verdicts and events, on a clock they are given."""
