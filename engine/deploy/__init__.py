"""What the user deploys: the llama-server command in the binary's own flag dialect (export), quoted
for bash, PowerShell or cmd (shell_quote), and vLLM / SGLang serve commands (engines).

May import engine.planning and everything below it.
"""
