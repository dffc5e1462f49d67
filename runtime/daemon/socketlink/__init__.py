"""The socket link for renderers (``quiesce serve --listen``): the client link over a
WebSocket or a Unix socket, with its listener, its checks and the browser client's page.
"""
