"""The control plane's services; they may use the database (``nefos.db``, ``nefos.objects``)."""
