"""ddptui's front ends: the command line, the headless console and the Textual dashboard."""
