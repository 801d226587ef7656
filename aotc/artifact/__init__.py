"""artifact"""
