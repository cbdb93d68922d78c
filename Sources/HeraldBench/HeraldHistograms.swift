// Herald's duration histograms as read from /metrics (Prometheus text), summed over instances,
// so that a window of a run (warm-up excluded) is the difference of two readings, and its
// percentiles are interpolated within the buckets as Prometheus' histogram_quantile does.

import Foundation

/// Herald's duration histograms at one moment: per name, the cumulative bucket counts, the sum and the count.
struct HeraldHistograms {
    struct Histogram {
        /// Upper bound (seconds, +inf last) to the count of observations at or below it.
        var buckets: [Double: Double] = [:]
        var sum = 0.0
        var count = 0.0

        /// The value below which `fraction` of the observations fall, in milliseconds, by linear
        /// interpolation inside its bucket; nil without observations.
        func percentileMilliseconds(_ fraction: Double) -> Double? {
            guard count > 0 else { return nil }
            let rank = fraction * count
            var lower = (bound: 0.0, count: 0.0)
            for (bound, cumulative) in buckets.sorted(by: { $0.key < $1.key }) {
                if cumulative >= rank {
                    guard bound.isFinite else { return lower.bound * 1000 }
                    let inBucket = cumulative - lower.count
                    let share = inBucket > 0 ? (rank - lower.count) / inBucket : 1
                    return (lower.bound + (bound - lower.bound) * share) * 1000
                }
                lower = (bound, cumulative)
            }
            return lower.bound * 1000
        }

        var meanMilliseconds: Double { count > 0 ? sum / count * 1000 : 0 }
    }

    /// Display name (a stage, "poll to result published", "apns request") to its histogram.
    var histograms: [String: Histogram] = [:]

    /// Reads the histograms of each instance's /metrics text and sums them.
    init(_ texts: [String]) {
        let families = [
            ("herald_stage_duration_seconds", nil),
            ("herald_notification_duration_seconds", "poll to result published"),
            ("herald_notification_ready_duration_seconds", "poll to publish started"),
            ("herald_apns_request_duration_seconds", "apns request"),
        ]
        for line in texts.flatMap({ $0.split(separator: "\n") }) where line.hasPrefix("herald_") {
            let parts = line.split(separator: " ")
            guard parts.count == 2, let value = Double(parts[1]) else { continue }
            let series = String(parts[0])
            for (family, fixedName) in families where series.hasPrefix(family) {
                guard let name = fixedName ?? Self.label("stage", in: series) else { continue }
                if series.hasPrefix(family + "_sum") { histograms[name, default: Histogram()].sum += value }
                if series.hasPrefix(family + "_count") { histograms[name, default: Histogram()].count += value }
                if series.hasPrefix(family + "_bucket"), let bound = Self.label("le", in: series) {
                    let upper = bound == "+Inf" ? Double.infinity : Double(bound) ?? .infinity
                    histograms[name, default: Histogram()].buckets[upper, default: 0] += value
                }
            }
        }
    }

    private init(histograms: [String: Histogram]) {
        self.histograms = histograms
    }

    /// What was observed after `earlier` (a reading of the same instances).
    func since(_ earlier: HeraldHistograms) -> HeraldHistograms {
        var difference = histograms
        for (name, before) in earlier.histograms {
            guard var now = difference[name] else { continue }
            now.sum -= before.sum
            now.count -= before.count
            for (bound, count) in before.buckets { now.buckets[bound, default: 0] -= count }
            difference[name] = now
        }
        return HeraldHistograms(histograms: difference)
    }

    /// One line per histogram: calls, mean, interpolated p50 and p99.
    func summary(title: String) -> String {
        guard !histograms.isEmpty else { return "\(title): /metrics not read" }
        let lines = histograms.keys.sorted().map { name -> String in
            let histogram = histograms[name]!
            let p50 = histogram.percentileMilliseconds(0.5).map { format($0, 2) } ?? "-"
            let p99 = histogram.percentileMilliseconds(0.99).map { format($0, 2) } ?? "-"
            return
                "  \(name.padding(toLength: 26, withPad: " ", startingAt: 0)) p50 \(p50) ms, p99 \(p99) ms, mean \(format(histogram.meanMilliseconds, 2)) ms, \(format(histogram.count, 0)) calls"
        }
        return ([title + " (percentiles interpolated in the buckets):"] + lines).joined(separator: "\n")
    }

    private static func label(_ name: String, in series: String) -> String? {
        series.firstRange(of: "\(name)=\"").map { range in String(series[range.upperBound...].prefix { $0 != "\"" }) }
    }
}

private func format(_ value: Double, _ decimals: Int) -> String { String(format: "%.\(decimals)f", value) }
