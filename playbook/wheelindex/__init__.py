"""Verified wheels shared through a PEP 503 index: what decides where a wheel runs (metadata.py), the index in
a folder, over HTTP or in s3:// (index.py), which wheel fits this machine and why (select.py), fetching,
checking and installing it or building instead (install.py), and the lines a user's project needs to get the
same wheel from its own ``uv sync`` or ``pip install`` (project_lines.py)."""
