"""sparsewatch.consumers"""
