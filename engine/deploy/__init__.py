"""What the user deploys. May import engine.planning and everything below it.

export       the llama-server command line for tuned settings, in the binary's own flag dialect
shell_quote  one argv list as a command line for bash, PowerShell or cmd
engines      vLLM and SGLang serve commands for the same settings
"""
