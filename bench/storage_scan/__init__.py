"""Storage scan benchmark: 1,000,000 files, scanned and compared with du -s."""
