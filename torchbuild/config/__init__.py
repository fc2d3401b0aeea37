"""Configuration, what the user says: matrix.yaml (its shape and its schema), the run and build options, the
environment variables, channel names, the version of a build of one's own and the users' own tests; checked against
what the project knows (torchbuild/knowledge), never the reverse."""
