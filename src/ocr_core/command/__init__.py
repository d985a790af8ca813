"""The command line: its parser and checks, the job command a message offers, and how the run was launched."""
