"""The tools of the demo question set (examples/eval/questions.yaml): a small shop's
lookups with fixed data, so every question has one right answer.

    art eval examples/eval/questions.yaml     # the dataset names these tools
"""

from __future__ import annotations

from typing import Literal

import art
from art.tools import Calculator

PRICES = {"ACME": 123.45, "GLOBEX": 88.0, "INITECH": 42.5, "UMBRELLA": 310.2}
USD_RATES = {"EUR": 0.92, "GBP": 0.79, "JPY": 151.3, "CHF": 0.88}
WEATHER = {
    "Oslo": {"temp_c": 4, "conditions": "cloudy"},
    "Lisbon": {"temp_c": 21, "conditions": "sunny"},
    "Tokyo": {"temp_c": 16, "conditions": "rain"},
    "Denver": {"temp_c": -2, "conditions": "snow"},
}


@art.tool
def stock_price(symbol: Literal["ACME", "GLOBEX", "INITECH", "UMBRELLA"]) -> float:
    """The latest price of one share of a company's stock, in US dollars."""
    return PRICES[symbol]


@art.tool
def order_total(quantity: int, unit_price: float, tax_percent: float = 0.0) -> float:
    """The total of an order in US dollars: quantity times unit price, plus tax."""
    return round(quantity * unit_price * (1 + tax_percent / 100), 2)


@art.tool
def convert_currency(amount: float, currency: Literal["EUR", "GBP", "JPY", "CHF"]) -> float:
    """Converts an amount of US dollars into another currency."""
    return round(amount * USD_RATES[currency], 2)


@art.tool
def weather(city: str) -> dict[str, object]:
    """Today's weather in a city: temperature in degrees Celsius and conditions."""
    if city not in WEATHER:
        raise ValueError(f"no weather for {city!r}; known cities: {', '.join(WEATHER)}")
    return {"city": city, **WEATHER[city]}


TOOLS = [Calculator(), stock_price, order_total, convert_currency, weather]
