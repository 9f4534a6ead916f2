# twistd -ny netweir-serve.tac
#
# Installed with the package: `netweir-serve --print-tac > netweir-serve.tac`
# writes this file out wherever suits you.
#
# Options come from $NETWEIR_SERVE_OPTIONS, written as on the command line
# (e.g. NETWEIR_SERVE_OPTIONS="--project shop=spiders/ --port 6800"), and
# credentials from $NETWEIR_SERVE_USERNAME and $NETWEIR_SERVE_PASSWORD.
from netweir_serve.cli import tac_application

application = tac_application()
