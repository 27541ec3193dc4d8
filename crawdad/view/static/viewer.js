// Filters apply as soon as one changes (the form also works without JavaScript).
document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("filters");
  if (!form) return;
  form.addEventListener("change", () => {
    // Leave empty fields out of the address, so links stay short.
    for (const el of form.elements) if (el.name && !el.value) el.disabled = true;
    form.submit();
  });
});
