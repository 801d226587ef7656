"""lowering"""
