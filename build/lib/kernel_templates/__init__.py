"""Jinja templates (StrictUndefined), each named after the file it produces: `<pipeline>/<file>.j2`."""
