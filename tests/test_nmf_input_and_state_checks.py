"""Input and state checks of the topic models (OR-/MOR-/WOR-NMF, dynamic NMF): regressions."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.utils.estimator_checks import check_estimator_sparse_tag
from sparsewatch.models.dynamic_nmf import DynamicNMF
from sparsewatch.models.nmf_online import MORNMF, ORNMF, WORNMF

_IS = "itakura-saito"


def _documents(seed: int = 0, n: int = 30, m: int = 12) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.random((n, m)) * (rng.random((n, m)) < 0.5)
    X[:, 0] += 0.1
    return X


def _assert_same_state(model: ORNMF | DynamicNMF, before: dict[str, np.ndarray]) -> None:
    after = model.get_state()
    assert after.keys() == before.keys()
    for name, value in before.items():
        np.testing.assert_array_equal(after[name], value, err_msg=name)


def _state(model: ORNMF | DynamicNMF) -> dict[str, np.ndarray]:
    return {k: np.array(v, copy=True) for k, v in model.get_state().items()}


ONLINE = [
    ORNMF(3, batch_size=10, random_state=0),
    WORNMF(3, random_state=0),
    MORNMF(3, buffer_size=2, random_state=0),
]


# ---------------------------------------------------------------- dynamic NMF
def test_dynamic_nmf_refuses_negative_entries_at_every_time_point() -> None:
    """Only the first time point refused negatives (scikit-learn's NMF did); a later one was
    stored and counted, then the solver overflowed (OverflowError) and left the window grown."""
    X = _documents()
    model = DynamicNMF(3, random_state=0).partial_fit(X)
    twin = DynamicNMF(3, random_state=0).partial_fit(X)
    before = _state(model)
    neg_sparse = sp.csr_matrix(X[:5])
    neg_sparse.data[2] = -0.5
    neg_wide = np.hstack([X[:5], np.zeros((5, 2))])  # wider: would have resized the topics
    neg_wide[1, 13] = -1.0
    for bad in (-X, neg_sparse, neg_wide):
        with pytest.raises(ValueError, match="Negative values"):
            model.partial_fit(bad)
        _assert_same_state(model, before)
        with pytest.raises(ValueError, match="Negative values"):
            model.transform(bad)
    model.partial_fit(X[:10])
    twin.partial_fit(X[:10])
    _assert_same_state(model, _state(twin))
    first = DynamicNMF(3)
    with pytest.raises(ValueError, match="Negative values"):
        first.partial_fit(neg_sparse)
    assert not hasattr(first, "components_")


def test_dynamic_nmf_vocabulary_must_name_every_column() -> None:
    """A vocabulary shorter than ``X`` raised IndexError while naming the events, after the
    time point had been learned (the next call then saw a model one step further)."""
    X = _documents()
    model = DynamicNMF(3, random_state=0).partial_fit(X, vocabulary=[f"t{j}" for j in range(12)])
    before = _state(model)
    with pytest.raises(ValueError, match="vocabulary has 3 terms"):
        model.partial_fit(X, vocabulary=["a", "b", "c"])
    _assert_same_state(model, before)
    model.partial_fit(X, vocabulary=[f"t{j}" for j in range(12)])
    assert all(term.startswith("t") for e in model.events_ for term in e.top_terms)


@pytest.mark.parametrize("call", ["partial_fit", "transform"])
def test_dynamic_nmf_input_that_is_not_a_real_matrix(call: str) -> None:
    """A 1-D array was taken as one document and complex data lost its imaginary part."""
    X = _documents()
    model = DynamicNMF(3, random_state=0).partial_fit(X)
    before = _state(model)
    with pytest.raises(ValueError, match="2-D"):
        getattr(model, call)(X[0])
    with pytest.raises(ValueError, match="Complex"):
        getattr(model, call)(X + 1j)
    _assert_same_state(model, before)


# ---------------------------------------------------------------- OR-/MOR-/WOR-NMF
@pytest.mark.parametrize("model", ONLINE, ids=lambda m: type(m).__name__)
def test_negative_input_is_refused_before_any_state_changes(model: ORNMF) -> None:
    """Negative entries were learned from silently (the Itakura-Saito path refused them)."""
    X = _documents()
    fitted = clone(model).fit(X)
    before = _state(fitted)
    neg = sp.csr_matrix(np.hstack([X[:6], X[:6, :2]]))  # wider: would grow the terms
    neg.data[4] = -0.25
    for bad in (-X, neg):
        for call in (fitted.partial_fit, fitted.fit, fitted.transform):
            with pytest.raises(ValueError, match="Negative values"):
                call(bad)
        _assert_same_state(fitted, before)


@pytest.mark.parametrize("model", ONLINE, ids=lambda m: type(m).__name__)
def test_one_dimensional_and_complex_input_raise_value_error(model: ORNMF) -> None:
    """A 1-D array raised IndexError; complex input was cast to its real part."""
    X = _documents()
    fitted = clone(model).fit(X)
    before = _state(fitted)
    for call in (fitted.partial_fit, fitted.fit, fitted.transform, fitted.predict):
        with pytest.raises(ValueError, match="2-D"):
            call(X[0])
        with pytest.raises(ValueError, match="Complex"):
            call(X + 1j)
    _assert_same_state(fitted, before)


@pytest.mark.parametrize("model", ONLINE, ids=lambda m: type(m).__name__)
def test_init_array_of_the_wrong_shape_is_refused_before_any_state_changes(model: ORNMF) -> None:
    """An ``init`` array was used whatever its shape: the first step failed inside numpy with
    the bases already set, so the model looked fitted with bases of the wrong shape."""
    X = _documents()
    bad = clone(model).set_params(init=np.ones((X.shape[1] - 1, 3)))
    with pytest.raises(ValueError, match="init has shape"):
        bad.partial_fit(X)
    assert not hasattr(bad, "components_")
    fitted = clone(model).fit(X)
    before = _state(fitted)
    fitted.set_params(init=np.ones((X.shape[1], 4)))
    with pytest.raises(ValueError, match="init has shape"):
        fitted.fit(X)
    _assert_same_state(fitted, before)
    good = clone(model).set_params(init=np.full((X.shape[1], 3), 1.0 / X.shape[1])).fit(X)
    assert good.components_.shape == (3, X.shape[1])


@pytest.mark.parametrize(
    ("model", "param"),
    [
        (ORNMF(2, batch_size=0), "batch_size"),
        (MORNMF(2, buffer_size=0), "buffer_size"),
        (ORNMF(2, batch_size=2.5), "batch_size"),
        (MORNMF(2, buffer_size=2.5), "buffer_size"),
        (ORNMF(2, horizon=2.5), "horizon"),
    ],
)
def test_sizes_below_one_are_refused(model: ORNMF, param: str) -> None:
    """``batch_size=0`` ran one empty step per sample (nothing of ``X`` learned);
    ``buffer_size=0`` failed with IndexError after the bases were set; a fractional size failed
    inside numpy (``TypeError``) or, for ``horizon``, was taken (theta ran modulo 2.5)."""
    X = _documents()
    for call in (model.partial_fit, model.fit):
        with pytest.raises(ValueError, match=param):
            call(X)
    assert not hasattr(model, "components_")


@pytest.mark.parametrize(
    "params",
    [
        {"beta_loss": "itakura-saito", "batch_size": 10},
        {"w_min": 0.005, "batch_size": 10},
        {"w_max": 0.2, "batch_size": 10},
    ],
    ids=["itakura-saito", "w_min", "w_max"],
)
def test_transform_of_a_wider_vocabulary_uses_the_resized_bases(params: dict) -> None:
    """With a box on the bases, ``transform`` of a wider ``X`` padded the bases with zero rows,
    outside the feasible set; under Itakura-Saito ``v / (W h)`` was then infinite and every
    coefficient NaN. The new rows are now those :meth:`resize_features` makes."""
    rng = np.random.default_rng(4)
    X = rng.random((40, 8)) + 0.05
    model = ORNMF(3, random_state=0, **params).fit(X)
    wider = np.hstack([X, rng.random((40, 2)) + 0.05])
    H = model.transform(wider)
    assert np.isfinite(H).all()
    assert np.isfinite(model.objective(wider))
    resized = clone(model).set_state(model.get_state()).resize_features(10)
    np.testing.assert_allclose(H, resized.transform(wider), rtol=1e-9, atol=1e-12)
    assert model.n_features_in_ == 8  # transform changes nothing


def test_plain_simplex_transform_of_a_wider_vocabulary_is_unchanged() -> None:
    """Without a box, new terms keep zero weight: the coefficients ignore them, as before."""
    X = _documents()
    model = ORNMF(3, batch_size=10, random_state=0).fit(X)
    wider = sp.hstack([sp.csr_matrix(X), sp.csr_matrix(np.ones((X.shape[0], 2)))]).tocsr()
    np.testing.assert_allclose(model.transform(wider), model.transform(X), rtol=1e-12)


@pytest.mark.parametrize("model", ONLINE, ids=lambda m: type(m).__name__)
def test_objective_of_no_samples_raises_value_error(model: ORNMF) -> None:
    """The mean loss of an empty batch raised ZeroDivisionError."""
    fitted = clone(model).fit(_documents())
    with pytest.raises(ValueError, match="no samples"):
        fitted.objective(np.zeros((0, 12)))


@pytest.mark.parametrize("model", ONLINE, ids=lambda m: type(m).__name__)
def test_sparse_input_tag_matches_what_fit_accepts(model: ORNMF) -> None:
    """The models take CSR input by design; their scikit-learn tags said they did not."""
    check_estimator_sparse_tag(type(model).__name__, clone(model))
    tags = model.__sklearn_tags__()
    assert tags.input_tags.sparse and tags.input_tags.positive_only
    assert DynamicNMF().__sklearn_tags__().input_tags.sparse


def _with_duplicates(X: np.ndarray) -> sp.csr_matrix:
    """``X`` as CSR with every stored entry split into two equal stored halves."""
    C = sp.csr_matrix(X)
    counts = np.diff(C.indptr)
    rows = np.repeat(np.arange(X.shape[0]), counts)
    order = np.lexsort((np.r_[0 * rows, 0 * rows + 1], np.r_[rows, rows]))
    data = np.r_[C.data, C.data][order] / 2.0
    indices = np.r_[C.indices, C.indices][order]
    indptr = np.r_[0, np.cumsum(2 * counts)]
    D = sp.csr_matrix((data, indices, indptr), shape=X.shape)
    assert not D.has_canonical_format and D.nnz == 2 * C.nnz
    np.testing.assert_allclose(D.toarray(), X)
    return D


@pytest.mark.parametrize("model", ONLINE, ids=lambda m: type(m).__name__)
def test_duplicate_sparse_entries_learn_what_their_sums_do(model: ORNMF) -> None:
    """``sq_`` (``1/2 sum ||v||^2``, in stopping rule (9)) was the dot product of the stored
    entries, so a CSR matrix with duplicate entries halved it and learned other bases."""
    X = _documents()
    dup = _with_duplicates(X)
    kept = dup.copy()
    a, b = clone(model).fit(X), clone(model).fit(dup)
    assert b.sq_ == pytest.approx(a.sq_, rel=1e-12)
    np.testing.assert_allclose(b.components_, a.components_, atol=1e-12)
    for name in ("data", "indices", "indptr"):  # the caller's matrix is left as it was
        np.testing.assert_array_equal(getattr(dup, name), getattr(kept, name))


def test_dynamic_nmf_leaves_the_callers_matrix_untouched() -> None:
    """Storing the first window summed the duplicates of the caller's CSR matrix in place."""
    X = _documents()
    dup = _with_duplicates(X)
    kept = dup.copy()
    model = DynamicNMF(3, random_state=0).partial_fit(dup).partial_fit(dup)
    for name in ("data", "indices", "indptr"):
        np.testing.assert_array_equal(getattr(dup, name), getattr(kept, name))
    twin = DynamicNMF(3, random_state=0).partial_fit(X).partial_fit(X)
    np.testing.assert_allclose(model.components_, twin.components_, atol=1e-12)


@pytest.mark.parametrize("model", [*ONLINE, DynamicNMF(3)], ids=lambda m: type(m).__name__)
def test_state_calls_before_fit_raise_not_fitted(model: ORNMF | DynamicNMF) -> None:
    """``get_state`` and ``resize_features`` raised AttributeError on an unfitted model."""
    from sklearn.exceptions import NotFittedError

    model = clone(model)
    with pytest.raises(NotFittedError):
        model.get_state()
    with pytest.raises(NotFittedError):
        model.resize_features(20)


@pytest.mark.parametrize("model", [*ONLINE, DynamicNMF(3)], ids=lambda m: type(m).__name__)
def test_set_state_with_a_missing_entry_restores_nothing(model: ORNMF | DynamicNMF) -> None:
    """A missing entry raised KeyError half-way, after the earlier entries were overwritten."""
    X = _documents()
    fit = (lambda m, x: m.partial_fit(x)) if isinstance(model, DynamicNMF) else type(model).fit
    source = fit(clone(model), 3.0 * X[:15])
    target = fit(clone(model), X)
    before = _state(target)
    state = source.get_state()
    del state["n_features_in_"]
    with pytest.raises(ValueError, match="missing"):
        target.set_state(state)
    _assert_same_state(target, before)


def test_mor_nmf_refuses_a_ring_of_another_length() -> None:
    """A state of a 10-slot ring restored into ``buffer_size=3`` ran silently: the ring position
    turned modulo 3, so slots 3..9 were never evicted and their statistics stayed forever."""
    X = _documents(n=60)
    source = MORNMF(3, buffer_size=10, batch_size=5, random_state=0).fit(X)
    target = MORNMF(3, buffer_size=3, batch_size=5, random_state=0)
    with pytest.raises(ValueError, match="buffer_size is 3"):
        target.set_state(source.get_state())
    assert not hasattr(target, "components_")
    same = MORNMF(3, buffer_size=10, batch_size=5).set_state(source.get_state())
    _assert_same_state(same, _state(source))


@pytest.mark.parametrize(
    ("params", "match"),
    [({"horizon": 0}, "horizon"), ({"nnls_method": "typo"}, "nnls_method")],
)
def test_invalid_step_parameters_are_refused_before_any_state_changes(
    params: dict, match: str
) -> None:
    """``horizon=0`` raised ZeroDivisionError in ``theta_t`` after the chunk had been added to
    the statistics and counted; an unknown ``nnls_method`` silently ran projected gradient."""
    from sparsewatch.models.nnls import solve_nnls

    X = _documents()
    model = ORNMF(3, batch_size=10, random_state=0).fit(X)
    before = _state(model)
    model.set_params(**params)
    with pytest.raises(ValueError, match=match):
        model.partial_fit(X)
    _assert_same_state(model, before)
    with pytest.raises(ValueError, match="method"):
        solve_nnls(np.eye(3), np.ones((3, 2)), method="typo")


def test_mor_nmf_buffer_size_changed_after_fitting() -> None:
    """``set_params(buffer_size=...)`` on a fitted MOR-NMF kept the old ring under the new
    modulo (a smaller size never evicted the slots past it; a larger one indexed past the ring);
    now a ValueError before any change, and ``fit`` starts over with the new size."""
    X = np.random.default_rng(1).random((60, 12))
    model = MORNMF(3, buffer_size=4, batch_size=10, random_state=0).fit(X)
    before = model.get_state()
    model.set_params(buffer_size=2)
    with pytest.raises(ValueError, match="call fit to start over"):
        model.partial_fit(X[:10])
    for name, value in before.items():
        np.testing.assert_array_equal(np.asarray(getattr(model, name)), value)
    model.fit(X)
    assert model.ring_n_.shape == (2,)
    model.partial_fit(X[:10])


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"n_components": 0}, "n_components must be an integer >= 1, got 0"),  # an empty model
        ({"max_inner_iter": 0}, "max_inner_iter must be an integer >= 1"),  # bases never moved
        ({"max_epochs": 0}, "max_epochs must be an integer >= 1"),  # fit left it unfitted
        ({"tau": -1.0}, "tau must be a finite number >= 0"),
        ({"alpha_W": float("nan")}, "alpha_W must be a finite number >= 0"),
        ({"h_max": -1.0}, "h_max must be None or > 0"),  # gave negative coefficients
    ],
)
@pytest.mark.parametrize("cls", [ORNMF, WORNMF, MORNMF])
def test_online_nmf_parameters_are_checked(cls, params, message) -> None:
    with pytest.raises(ValueError, match=message):
        cls(**params).fit(_documents())


def test_a_changed_rank_is_refused_not_kept_silently() -> None:
    """``set_params(n_components=5)`` on a rank-3 model, then ``partial_fit``, or restoring a
    rank-3 state into a rank-5 model, kept 3 bases without a word."""
    model = MORNMF(n_components=3, batch_size=10, random_state=0).fit(_documents())
    state = _state(model)
    with pytest.raises(ValueError, match="n_components is 5 but the model has 3 bases"):
        model.set_params(n_components=5).partial_fit(_documents(1))
    with pytest.raises(ValueError, match="state has 3 bases, but n_components is 5"):
        MORNMF(n_components=5).set_state(state)
    assert MORNMF(n_components=3).set_state(state).components_.shape[0] == 3


@pytest.mark.parametrize("cls", [ORNMF, MORNMF])
@pytest.mark.parametrize(("fitted", "changed"), [("frobenius", _IS), (_IS, "frobenius")])
def test_a_changed_loss_is_refused_before_any_state_changes(cls, fitted, changed) -> None:
    """``set_params(beta_loss=...)`` after fitting, or a state of the other loss restored: the
    statistics have the other loss's shape (``r x r`` against ``m x r``); the next step failed
    inside numpy (a broadcast error), and a restored state was taken as it was."""
    X = np.random.default_rng(0).random((40, 12)) + 0.1
    model = cls(n_components=3, beta_loss=fitted, random_state=0).fit(X)
    state = _state(model)
    with pytest.raises(ValueError, match=f"fitted with '{fitted}': fit it again, or clone it"):
        model.set_params(beta_loss=changed).partial_fit(X)
    assert all(np.array_equal(v, _state(model)[k]) for k, v in state.items())
    with pytest.raises(ValueError, match=f"state was fitted with '{fitted}'"):
        cls(n_components=3, beta_loss=changed).set_state(state)
    model.set_params(beta_loss=fitted).partial_fit(X)  # the loss it was fitted with: goes on
    assert cls(n_components=3, beta_loss=fitted).set_state(state).n_steps_ == state["n_steps_"]


def test_errors_name_the_model_used() -> None:
    with pytest.raises(ValueError, match="MORNMF"):
        MORNMF(n_components=2).fit(-_documents())


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"n_emerging": -1}, "n_emerging must be an integer >= 0"),  # made 29 emerging topics
        ({"n_top_terms": -2}, "n_top_terms must be an integer >= 1"),
        ({"window": 0}, "window must be an integer >= 1"),  # IndexError
        ({"max_topics": 0}, "max_topics must be an integer >= 5"),  # argmax of empty sequence
        ({"max_topics": 4}, "max_topics must be an integer >= 5"),  # dropped initial topics
        ({"delta": -0.1}, "delta must be a finite number >= 0"),  # "empty set"
        ({"mu": -1.0}, "mu must be a finite number >= 0"),
        ({"hp_lambda": float("inf")}, "hp_lambda must be a finite number >= 0"),
        ({"n_initial_topics": 0}, "n_initial_topics must be an integer >= 1"),
        # every evolving topic dropped at every time point, emerging ones at birth without event
        ({"n_emerging": 5, "max_topics": 5}, r"n_emerging \(5\) must be below max_topics \(5\)"),
    ],
)
def test_dynamic_nmf_parameters_are_checked(params, message) -> None:
    with pytest.raises(ValueError, match=message):
        DynamicNMF(**params).partial_fit(_documents())


def test_dynamic_nmf_accepts_a_random_state_instance_with_sampled_time_points() -> None:
    """A RandomState instance (a standard scikit-learn ``random_state``) raised TypeError once a
    time point had more documents than ``max_step_documents``."""
    model = DynamicNMF(2, max_step_documents=10, random_state=np.random.RandomState(0))
    for seed in range(3):
        model.partial_fit(_documents(seed))
    assert model.components_.shape[1] == 12


def test_a_lower_bound_the_vocabulary_outgrows_is_named() -> None:
    """``w_min`` above 1 / n_terms: the projection's bare "empty set", once the vocabulary grew."""
    model = ORNMF(n_components=2, w_min=0.05, batch_size=10, random_state=0)
    model.fit(_documents(m=12))
    before = _state(model)
    with pytest.raises(ValueError, match=r"w_min = 0\.05 for 30 terms: .* at most 1 / n_features"):
        model.partial_fit(_documents(1, m=30))
    _assert_same_state(model, before)
    with pytest.raises(ValueError, match=r"w_min = 0\.05 for 30 terms"):
        ORNMF(n_components=2, w_min=0.05).fit(_documents(m=30))


@pytest.mark.parametrize("cls", [ORNMF, MORNMF])
def test_a_replaced_topic_starts_from_its_seed_with_no_statistics(cls) -> None:
    model = cls(n_components=3, batch_size=10, random_state=0).fit(_documents())
    seed = np.zeros(12)
    seed[[3, 7]] = [3.0, 1.0]
    model.replace_components([1], seed[None, :])
    np.testing.assert_allclose(model.components_[1], seed / 4.0)  # on the simplex
    assert not model.B_[:, 1].any() and not model.A_[1].any() and not model.A_[:, 1].any()
    if cls is MORNMF:
        assert not model.ring_B_[:, :, 1].any() and not model.ring_A_[:, 1].any()
        model.partial_fit(_documents(1))
        np.testing.assert_allclose(model.B_, model.ring_B_.sum(axis=0), atol=1e-12)
    else:
        model.partial_fit(_documents(1))
    assert np.all(model.components_ >= 0)
    np.testing.assert_allclose(model.components_.sum(axis=1), 1.0)


def test_replacing_topics_refuses_bad_bases() -> None:
    model = MORNMF(n_components=2, batch_size=10, random_state=0).fit(_documents())
    with pytest.raises(ValueError, match=r"bases have shape \(1, 5\), expected .* \(1, 12\)"):
        model.replace_components([0], np.ones((1, 5)))
    with pytest.raises(ValueError, match="topic index out of range"):
        model.replace_components([2], np.ones((1, 12)))
    with pytest.raises(ValueError, match="finite and non-negative"):
        model.replace_components([0], -np.ones((1, 12)))


def test_replacing_topics_checks_the_shape_and_the_index() -> None:
    """Review 52, item 2: ``bases`` were reshaped to ``(len(index), -1)``: the ``n_features x k``
    layout of ``init`` was scrambled silently, and ``(4, 3)`` bases passed for two topics of 6
    terms. A repeated index kept only its last row. All refused now, before anything changes."""
    X = np.random.default_rng(0).random((30, 6))
    model = MORNMF(n_components=3, random_state=0).fit(X)
    before = _state(model)
    columns = np.zeros((6, 2))
    columns[:3, 0] = columns[3:, 1] = 1.0 / 3.0
    for index, bases in (
        ([0, 1], columns),  # init's layout
        ([0, 1], np.ones((4, 3))),
        ([0, 1], np.ones(12)),  # 1-d only for a single topic
        ([0], np.ones((6, 1))),
        ([[0], [1]], np.ones((2, 6))),
    ):
        with pytest.raises(ValueError, match=r"expected|integer topic indices"):
            model.replace_components(index, bases)
    with pytest.raises(ValueError, match="repeated"):
        model.replace_components([1, 1], np.ones((2, 6)))
    with pytest.raises(ValueError, match="integer topic indices"):
        model.replace_components([0.5], np.ones((1, 6)))
    _assert_same_state(model, before)
    model.replace_components([0, 1], columns.T)
    model.replace_components(2, np.arange(6.0))  # a single topic: one 1-d row
    np.testing.assert_allclose(model.components_, [*columns.T, np.arange(6.0) / 15.0])


@pytest.mark.parametrize("cls", [ORNMF, MORNMF])
@pytest.mark.parametrize("params", [{"w_min": 0.01}, {"w_max": 0.001}])
def test_a_box_set_after_fitting_that_no_basis_meets_changes_nothing(cls, params) -> None:
    """Review 52, item 3: ``set_params`` of ``w_min``/``w_max`` to a box no basis over the
    vocabulary (200 terms) can meet failed in the projection, after the step had accumulated
    its statistics and counted itself."""
    X = np.random.default_rng(0).random((20, 200))
    model = cls(n_components=3, batch_size=10, random_state=0).fit(X)
    before = _state(model)
    model.set_params(**params)
    with pytest.raises(ValueError, match="for 200 terms"):
        model.partial_fit(X[:10])
    with pytest.raises(ValueError, match="for 205 terms"):
        model.partial_fit(np.hstack([X[:10], X[:10, :5]]))  # wider: would grow the terms
    _assert_same_state(model, before)


@pytest.mark.parametrize("cls", [ORNMF, WORNMF, MORNMF])
def test_statistics_that_overflow_are_refused_before_any_state_changes(cls) -> None:
    """Review 52, item 4: finite documents of entries ``1e160`` overflowed ``A_``/``B_``/``sq_``
    to inf/NaN with warnings only, and the bases froze for good (Algorithm 2's ``M_*`` stayed
    0). The step is refused, and the model learns on from ordinary documents."""
    rng = np.random.default_rng(0)
    X = rng.random((40, 20)) * (rng.random((40, 20)) < 0.4)
    ring = {"buffer_size": 2} if cls is MORNMF else {}
    model = cls(3, batch_size=10, random_state=0, **ring).fit(X)
    twin = clone(model).fit(X)
    before = _state(model)
    with np.errstate(over="ignore", invalid="ignore"), pytest.raises(ValueError, match="overflow"):
        model.partial_fit(X[:10] * 1e160)
    _assert_same_state(model, before)
    model.partial_fit(X)
    twin.partial_fit(X)
    np.testing.assert_array_equal(model.components_, twin.components_)
