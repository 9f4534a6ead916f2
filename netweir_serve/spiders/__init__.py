"""Reading spider files in processes of their own: the facade (reader), the
processes (runners, _forkserver) and the only module that imports netweir (_loader)."""
