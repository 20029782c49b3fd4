"""The names and answers this project was made with, for the tasks."""

PACKAGE = "{{ cookiecutter.package_name }}"  # python -m PACKAGE.train
IMAGE = "{{ cookiecutter.project_slug }}"  # the image's name
PYTHON_VERSION = "{{ cookiecutter.python_version }}"  # the images' Python, and the locks'
