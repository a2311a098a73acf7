"""``j2c-unpack``'s per-node layer cache: verified blobs and extracted (relocated) trees kept
between jobs, and the plans of manifests validated on this node."""
