{{ cookiecutter.description | tojson }}
