"""The CPU clients' own timer line: the median of the second half of their step times (the first half warms
up), printed as `median step X ms (own timer, N steps)`, the line plain_pairs.sh reads."""
import statistics


def report(times: list[float]) -> float:
    """Print and return the median of the second half of ``times`` (seconds)."""
    half = times[len(times) // 2:]
    median = statistics.median(half)
    print(f"median step {1e3 * median:.2f} ms (own timer, {len(half)} steps)")
    return median
