"""What the tasks do differently for each framework: one module each, the project's chosen by
its [tool.cloudgpu] framework (project.framework)."""
