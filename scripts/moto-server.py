"""moto's S3 server, with each write request handled whole before the next one starts.

moto checks a conditional PUT (`If-None-Match: *`, `If-Match`) and then writes, without a lock,
on a threaded server: two racing conditional writes of one key can both pass the check and
both answer 200, the second overwriting the first. Real S3 decides a conditional write
atomically, and mend's object-storage catalog relies on that (each commit is a put-if-absent of
the log's next version). So this runs moto's own application behind one lock for the requests
that write (PUT, POST, DELETE); reads still run concurrently.

It also serves S3 alone: moto's own server finds the service of every request by scanning its
package folder for service modules, under one lock, which was a third of its CPU time in the
S3 tests (py-spy); mend only ever talks S3 to it. Run by scripts/with-s3:

    python moto-server.py HOST PORT
"""

import os
import sys
import threading

from moto.moto_server.werkzeug_app import MotoRequestHandler, create_backend_app
from werkzeug.serving import run_simple

WRITES = {"PUT", "POST", "DELETE"}
MARKER = "x-mend-test-server"


class WritesOneAtATime:
    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        def marked(status, headers, exc_info=None):
            # Tells a test that it talks to this server, not to moto's own.
            return start_response(status, headers + [(MARKER, "writes-one-at-a-time")], exc_info)

        if environ.get("REQUEST_METHOD") not in WRITES:
            return self.app(environ, marked)
        with self.lock:
            # The whole answer is produced under the lock: moto decides and writes while the
            # body of its response is built.
            return list(self.app(environ, marked))


class QuietRequestHandler(MotoRequestHandler):
    """moto's handler without a log line per request (errors are still logged)."""

    def log_request(self, code="-", size="-"):
        pass


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    # moto builds the URLs it answers (presigned, multipart) from it, as its own server does.
    os.environ.setdefault("MOTO_PORT", str(port))
    app = create_backend_app("s3")
    run_simple(
        host,
        port,
        WritesOneAtATime(app),
        threaded=True,
        request_handler=QuietRequestHandler,
    )


if __name__ == "__main__":
    main()
