"""Admission: which queued claims get devices now. Pure functions over the pools' state."""
