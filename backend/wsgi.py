import os

from django.core.wsgi import get_wsgi_application

from backend.core.private_files import use_private_umask

use_private_umask()  # the web server's files (the SQLite journal, say) are its own
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "backend.settings")
application = get_wsgi_application()
