"""jobmanager"""
