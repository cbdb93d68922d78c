/// SplitMix64: a tiny, fast, seedable generator; statistical quality is ample for the mocks'
/// fault draws.
package struct SeededRandomNumberGenerator: RandomNumberGenerator, Sendable {
    private var state: UInt64

    package init(seed: UInt64) {
        self.state = seed
    }

    package mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var mixed = state
        mixed = (mixed ^ (mixed >> 30)) &* 0xBF58_476D_1CE4_E5B9
        mixed = (mixed ^ (mixed >> 27)) &* 0x94D0_49BB_1331_11EB
        return mixed ^ (mixed >> 31)
    }

    /// A uniform draw in `0..<1`.
    package mutating func nextUnitInterval() -> Double {
        Double(next() >> 11) * 0x1.0p-53
    }
}
