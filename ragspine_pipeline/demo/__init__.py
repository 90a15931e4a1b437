"""The embedded demo: a policy corpus, a frozen golden set, production traces and index manifests of the
built-in reference engine, written under one directory (the pipeline uses ``var/demo/``)."""
