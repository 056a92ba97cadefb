"""Launchers: how an image turns settings into the server's argv (one module per launcher;
the interface in :mod:`servedeck.launchers.base`, the known ones in
:mod:`servedeck.launchers.registry`)."""
