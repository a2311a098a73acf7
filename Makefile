# Two entry points for a fresh machine: `make lab` (set up, then serve JupyterLab with j2c on the
# embedded defaults) and `make test` (set up, then run every check). Logic lives in scripts/.
.PHONY: setup lab test clean

setup:
	bash scripts/setup.sh

lab: setup
	bash scripts/lab.sh

test:
	bash scripts/test.sh

clean:
	rm -rf .venv node_modules lib j2c_server/labextension ui-tests/node_modules .bench
