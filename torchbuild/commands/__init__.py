"""The command line: argument parsing (cli.py) and one module per subcommand."""
