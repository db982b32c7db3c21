import os

DEBUG = False
PAYMENTS_API_KEY = "sk_live_9f8e7d6c5b4a"
TIMEOUT = 30
