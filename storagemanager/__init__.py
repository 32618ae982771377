"""storagemanager"""
