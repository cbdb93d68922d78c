/// A strict reader of Prometheus' text exposition format (version 0.0.4): `# TYPE` lines, then
/// samples `name{label="value",…} value`. It rejects what Prometheus would: a sample of a family
/// with no TYPE before it, a malformed label set or value, a histogram whose buckets are not
/// cumulative or whose `+Inf` bucket differs from its `_count`.
struct PrometheusText {
    struct Sample: Hashable {
        var name: String
        var labels: [String: String]
        var value: Double
    }

    private(set) var types: [String: String] = [:]
    private(set) var samples: [Sample] = []

    init(_ text: String) throws {
        for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: true).enumerated() {
            if line.hasPrefix("#") {
                let words = line.split(separator: " ")
                if words.count >= 4, words[1] == "TYPE" {
                    guard ["counter", "gauge", "histogram", "summary", "untyped"].contains(String(words[3])) else {
                        throw TestFailure("line \(number + 1): unknown type \(words[3])")
                    }
                    types[String(words[2])] = String(words[3])
                }
                continue
            }
            let sample = try Self.sample(Substring(line), line: number + 1)
            guard types[Self.family(of: sample.name, in: types)] != nil else {
                throw TestFailure("line \(number + 1): \(sample.name) has no # TYPE before it")
            }
            samples.append(sample)
        }
        try checkHistograms()
    }

    /// The value of the one sample `name` with exactly `labels`, or nil.
    func value(_ name: String, _ labels: [String: String] = [:]) -> Double? {
        samples.first { $0.name == name && $0.labels == labels }?.value
    }

    /// The sum over every sample `name` whose labels include `labels`.
    func sum(_ name: String, where labels: [String: String] = [:]) -> Double {
        samples.filter { sample in sample.name == name && labels.allSatisfy { sample.labels[$0.key] == $0.value } }
            .map(\.value).reduce(0, +)
    }

    /// The family names exported (a histogram's `_bucket`, `_sum` and `_count` under its own).
    var families: Set<String> { Set(types.keys) }

    private static func family(of name: String, in types: [String: String]) -> String {
        for suffix in ["_bucket", "_sum", "_count"] where name.hasSuffix(suffix) {
            let base = String(name.dropLast(suffix.count))
            if types[base] == "histogram" || types[base] == "summary" { return base }
        }
        return name
    }

    private static func sample(_ line: Substring, line number: Int) throws -> Sample {
        var rest = line[...]
        let name = rest.prefix { $0.isLetter || $0.isNumber || $0 == "_" || $0 == ":" }
        guard let first = name.first, !first.isNumber else { throw TestFailure("line \(number): bad metric name") }
        rest = rest.dropFirst(name.count)
        var labels: [String: String] = [:]
        if rest.first == "{" {
            rest = rest.dropFirst()
            while rest.first != "}" {
                let label = rest.prefix { $0.isLetter || $0.isNumber || $0 == "_" }
                guard !label.isEmpty else { throw TestFailure("line \(number): bad label name") }
                rest = rest.dropFirst(label.count)
                guard rest.hasPrefix("=\"") else { throw TestFailure("line \(number): expected =\" after \(label)") }
                rest = rest.dropFirst(2)
                var value = ""
                while let character = rest.first, character != "\"" {
                    rest = rest.dropFirst()
                    if character == "\\" {
                        guard let escaped = rest.first else { throw TestFailure("line \(number): dangling escape") }
                        rest = rest.dropFirst()
                        switch escaped {
                        case "n": value.append("\n")
                        case "\\", "\"": value.append(escaped)
                        default: throw TestFailure("line \(number): bad escape \\\(escaped)")
                        }
                    } else {
                        value.append(character)
                    }
                }
                guard rest.first == "\"" else { throw TestFailure("line \(number): unterminated label value") }
                rest = rest.dropFirst()
                guard labels.updateValue(value, forKey: String(label)) == nil else { throw TestFailure("line \(number): repeated label \(label)") }
                if rest.first == "," { rest = rest.dropFirst() }
            }
            rest = rest.dropFirst()
        }
        let fields = rest.split(separator: " ")
        guard (1...2).contains(fields.count), let value = Self.number(fields[0]) else {
            throw TestFailure("line \(number): bad sample value in \(line)")
        }
        return Sample(name: String(name), labels: labels, value: value)
    }

    private static func number(_ text: Substring) -> Double? {
        switch text {
        case "+Inf": .infinity
        case "-Inf": -.infinity
        case "NaN": .nan
        default: Double(text)
        }
    }

    private func checkHistograms() throws {
        for (family, type) in types where type == "histogram" {
            var series: [[String: String]: [(le: Double, count: Double)]] = [:]
            for sample in samples where sample.name == family + "_bucket" {
                guard let le = sample.labels["le"].flatMap({ Self.number(Substring($0)) }) else {
                    throw TestFailure("\(family): bucket without le")
                }
                var others = sample.labels
                others["le"] = nil
                series[others, default: []].append((le, sample.value))
            }
            for (labels, buckets) in series {
                let sorted = buckets.sorted { $0.le < $1.le }
                guard zip(sorted, sorted.dropFirst()).allSatisfy({ $0.count <= $1.count }) else {
                    throw TestFailure("\(family)\(labels): buckets are not cumulative")
                }
                guard sorted.last?.le == .infinity, sorted.last?.count == value(family + "_count", labels) else {
                    throw TestFailure("\(family)\(labels): the +Inf bucket is not the count")
                }
            }
        }
    }
}
