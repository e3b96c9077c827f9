"""sparsewatch.storage"""
