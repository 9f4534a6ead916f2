"""Run health: how a run that finished did against its checks and the
runs before it (a run that exits 0 with a tenth of its usual items is
``degraded``, not merely finished). Pure: the store judges each end with
it in the transaction that records the end."""
