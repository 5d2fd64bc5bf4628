"""The wire protocols: what the server sends and a client answers, as Flower records.

``common`` holds what every strategy shares (errors, fake batches, identity, record helpers);
one module per algorithm holds its message type, record names and payload codecs.
"""
