"""What the device claims about dtypes: the ones the Tensor API cannot do without are claimed, and a dtype the
device does not claim is refused with a TypeError naming the dtype and the device (and what to do), both when a
tensor is made and when a kernel would compute in it, instead of running and producing garbage."""

from __future__ import annotations

import pytest
from tinygrad import Tensor
from tinygrad.conformance.claims import REQUIRED_DTYPES, DeviceClaims
from tinygrad.conformance.plugin import claims_at_collection
from tinygrad.device import CONTRACT_VERSION
from tinygrad.dtype import DType, dtypes


@pytest.mark.parametrize("d", REQUIRED_DTYPES, ids=lambda d: d.name)
def test_required_dtype_is_claimed(tg_claims: DeviceClaims, d: DType) -> None:
    assert tg_claims.claims(d), (f"device {tg_claims.device} does not claim {d.name}, which the Tensor API needs on "
                                 f"every device (indices, comparisons, the default float)")


def test_contract_major_matches_core(tg_claims: DeviceClaims) -> None:
    major = tg_claims.contract_version.split(".")[0]
    assert major == CONTRACT_VERSION.split(".")[0], \
        f"{tg_claims.package} implements device contract {tg_claims.contract_version}, core {CONTRACT_VERSION}"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """`unclaimed` runs over the dtypes the device does not claim; one skip says so when it claims them all."""
    if "unclaimed" not in metafunc.fixturenames:
        return
    claims = claims_at_collection(metafunc.config)
    candidates = claims.unclaimed if claims is not None else dtypes.all()  # without claims, the fixtures skip
    if candidates:
        metafunc.parametrize("unclaimed", candidates, ids=lambda d: d.name)
    else:
        assert claims is not None
        skip = pytest.mark.skip(reason=f"device {claims.device} claims every dtype: there is nothing to refuse")
        metafunc.parametrize("unclaimed", [pytest.param(None, id="none", marks=skip)])


def _assert_names(err: BaseException, d: DType, device: str) -> None:
    message = str(err)
    assert d.name in message and device.split(":")[0] in message, \
        f"the error for an unclaimed {d.name} on {device} must name both: {message!r}"


def test_unclaimed_dtype_is_refused_on_creation(tg_device: str, tg_claims: DeviceClaims, unclaimed: DType) -> None:
    d = unclaimed
    assert not tg_claims.claims(d)
    with pytest.raises(TypeError) as err:
        Tensor([1, 0, 1], dtype=d, device=tg_device).realize()
    _assert_names(err.value, d, tg_device)


def test_unclaimed_dtype_is_refused_in_a_kernel(tg_device: str, tg_claims: DeviceClaims, unclaimed: DType) -> None:
    d = unclaimed
    assert not tg_claims.claims(d)
    with pytest.raises(TypeError) as err:
        (Tensor([1, 0, 1], dtype=dtypes.int32, device=tg_device).cast(d) + 1).realize()
    _assert_names(err.value, d, tg_device)
