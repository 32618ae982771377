"""The smallest WSGI app, for tests that start a real gunicorn without Django."""


def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello\n"]
