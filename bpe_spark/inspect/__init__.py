"""What a model holds, for people: vocabulary statistics, the summary of ``bpe-spark inspect``, token
display and the training report.
"""
