"""coldscope's version, in the bottom layer so that every module can name it (a stored run's
``tool.version``, a startup model's ``created_by``, ``coldscope --version``, the HTML report's
generator) without importing the package root, which is the front door above every layer."""

__version__ = "0.1.0"
