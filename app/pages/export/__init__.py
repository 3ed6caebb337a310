"""The Export page: ``page`` holds ExportPage (the llama-server command for the session's settings, and
its validation) and ``runner`` the ValidateRunner thread that checks the command against a real
llama-server."""
