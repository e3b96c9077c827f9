"""sparsewatch.models"""
