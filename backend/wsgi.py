import os

from django.core.wsgi import get_wsgi_application

from backend.core.front import FrontClient
from backend.core.private_files import use_private_umask

use_private_umask()  # the web server's files (the SQLite journal, say) are its own
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "backend.settings")
# The client's address as the front (nginx, over gunicorn's unix socket) tells it.
application = FrontClient(get_wsgi_application())
