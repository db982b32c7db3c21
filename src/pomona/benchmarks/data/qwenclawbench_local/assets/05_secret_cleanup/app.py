from settings import PAYMENTS_API_KEY, TIMEOUT

print(bool(PAYMENTS_API_KEY), TIMEOUT)
