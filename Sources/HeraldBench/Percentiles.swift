/// The value at `fraction` of sorted `values` (0 when empty).
func percentile(_ values: [Int64], _ fraction: Double) -> Int64 {
    values.isEmpty ? 0 : values[min(values.count - 1, Int(Double(values.count) * fraction))]
}

/// p50, p99 and max of latencies in milliseconds (all 0 when there are none).
struct Percentiles: CustomStringConvertible {
    var p50: Int64
    var p99: Int64
    var max: Int64

    init(_ latencies: [Int64]) {
        let sorted = latencies.sorted()
        (p50, p99, max) = (percentile(sorted, 0.5), percentile(sorted, 0.99), sorted.last ?? 0)
    }

    var description: String { "p50 \(p50) ms, p99 \(p99) ms, max \(max) ms" }
}
