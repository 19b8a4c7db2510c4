"""Test factories shipped with the package: a real trainer process, the service's app in this
process, an OTLP receiver, an NVML stand-in, the scripted job. Used by this project's tests and by
anyone testing against akka."""
