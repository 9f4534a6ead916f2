"""Reading spider files in processes of their own: the facade (reader), the
processes (runners, _forkserver), their wire protocol (protocol, standard
library only) and the only module that imports netweir (_loader)."""
