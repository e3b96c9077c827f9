"""sparsewatch.replay"""
