"""An example handler package for deploy/examples/handlers/Dockerfile."""
