"""model/positions"""
