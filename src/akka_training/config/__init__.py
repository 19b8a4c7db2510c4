"""The deployment's settings (`trainer.*`), its pools and the devices of this host: what every
layer of the service reads, below the backends that use it."""
