"""The browser client's static files (``index.html``, ``app.js``, ``app.css``), shipped as
package data and served by the socket link (``runtime.daemon.socketlink.webpage``).
"""
