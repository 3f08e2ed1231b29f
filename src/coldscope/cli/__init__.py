"""The command line: thin commands that build a config, call one library function, print."""
