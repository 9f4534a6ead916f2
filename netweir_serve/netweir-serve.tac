# twistd -ny netweir-serve.tac
#
# Installed with the package: `netweir-serve --print-tac > netweir-serve.tac`
# writes this file out wherever suits you.
#
# Options come from $NETWEIR_SERVE_OPTIONS, written as on the command line
# (e.g. NETWEIR_SERVE_OPTIONS="--project shop=spiders/ --port 6800"), and
# credentials from $NETWEIR_SERVE_USERNAME and $NETWEIR_SERVE_PASSWORD.
#
# First of all, no other process of this user may read this one's
# environment (the password): see docs/security.md.
from netweir_serve import _proctree
_proctree.make_undumpable()

from netweir_serve.cli import tac_application  # noqa: E402

application = tac_application()
