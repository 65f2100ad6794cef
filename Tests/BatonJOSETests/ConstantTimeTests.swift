import BatonJOSE
import Testing

@Suite("Constant-time comparison")
struct ConstantTimeTests {
    @Test("equal bytes match; any difference, shorter or longer, does not")
    func comparisons() {
        let token = "admin-token-0123456789"
        #expect(ConstantTime.equals(token, token))
        #expect(!ConstantTime.equals("admin-token-012345678X", token))
        #expect(!ConstantTime.equals(String(token.dropLast()), token))
        #expect(!ConstantTime.equals("", token))
        // The length difference is compared as an integer: 256 extra bytes (0 modulo 256) do not match.
        #expect(!ConstantTime.equals(token + String(repeating: "\u{0}", count: 256), token))
        #expect(!ConstantTime.equals(token + String(repeating: "A", count: 256), token))
        #expect(ConstantTime.equals("", ""))
    }
}
