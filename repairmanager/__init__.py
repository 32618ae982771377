"""repairmanager"""
