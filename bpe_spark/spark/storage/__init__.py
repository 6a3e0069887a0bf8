"""Files on Spark: Hadoop's file system under the output rules, and which file layer reaches a URI.
"""
